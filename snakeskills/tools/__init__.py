"""Tools a model calls while it generates: the protocol (tags in the text), the tools by name (Python in the
sandbox, a calculator, a user's own ``module:function``) and the loop that runs them between turns."""
