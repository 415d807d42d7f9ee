from snakeskills.job import script_logging
from snakeskills.models.merge import merge_adapter

with script_logging(snakemake.log[0]) as logger:
    merge_adapter(
        base_model_path=snakemake.params.model_path,
        adapter_path=snakemake.input.adapter,
        output_dir=snakemake.output.merged,
        dtype=snakemake.params.model["dtype"],
        trust_remote_code=snakemake.params.model["trust_remote_code"],
    )
