"""The judge stage (rules/judge.smk): the rule-based judge (``judge``), programs run in the bubblewrap sandbox
(``code_execution``, ``program_runner``, ``sandbox``, ``timed_pool``) and the LLM judge (``llm_judge``)."""
