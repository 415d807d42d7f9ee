from snakeskills.job import script_logging
from snakeskills.models.merge import merge_adapter
from snakeskills.settings.models import Model

with script_logging(snakemake.log[0]) as logger:
    model = Model.from_dict(snakemake.params.model, "model")
    merge_adapter(
        base_model_path=snakemake.params.model_path,
        adapter_path=snakemake.input.adapter,
        output_dir=snakemake.output.merged,
        dtype=model.dtype,
        trust_remote_code=model.trust_remote_code,
    )
