from snakeskills.backends import SamplingParams, build_backend
from snakeskills.generate import generate_chunk
from snakeskills.workflow import script_logging

with script_logging(snakemake.log[0]) as logger:
    generation = snakemake.params.generation
    model = snakemake.params.model
    backend = build_backend(
        generation["backend"],
        model_path=snakemake.params.model_path,
        adapter_path=snakemake.params.adapter_path,
        device=generation["device"],
        dtype=model["dtype"],
        batch_size=generation["batch_size"],
        trust_remote_code=model["trust_remote_code"],
        threads=snakemake.threads,
    )
    sampling = generation["sampling"]
    counts = generate_chunk(
        backend=backend,
        prepared_path=snakemake.input.split,
        output_path=snakemake.output.generations,
        done_path=snakemake.output.done,
        chunk_index=int(snakemake.wildcards.chunk),
        num_chunks=int(snakemake.wildcards.num_chunks),
        random_seed=int(snakemake.wildcards.seed),
        prompt_config=snakemake.params.prompt,
        sampling=SamplingParams(
            temperature=sampling["temperature"],
            top_p=sampling["top_p"],
            top_k=sampling["top_k"],
            max_new_tokens=sampling["max_new_tokens"],
            stop=tuple(sampling["stop"]),
        ),
        rows_per_flush=generation["rows_per_flush"],
    )
    logger.info("generate done: %s", counts)
