"""snakeskills: the skill-improvement loop (prepare -> generate -> judge -> summarize -> SFT -> eval).

All logic lives in plain functions here so it is testable without Snakemake; the workflow's
scripts only unpack ``snakemake.*`` and call into this package.
"""

__version__ = "0.1.0"
