"""The judge stage (rules/judge.smk): the rule-based judge (``judge``) and the answer extractors it reads with
(``extractors``), programs a model wrote run against tests (``code_execution``, in ``snakeskills.sandbox``) and the
LLM judge (``llm_judge``)."""
