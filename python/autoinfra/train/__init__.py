"""The training job: a small GPT-style transformer trained data-parallel
(DDP) or as a pipeline on CPU over torch.distributed, with the autoinfra
backend or gloo (docs/train.md).

    PYTHONPATH=python build/autoinfra launch -n 4 -- /usr/bin/python3 -m autoinfra.train --help

job: the job and its flags (main); pipeline: the pipeline's 1F1B run;
compute_profile: the compute profile the planner reads (--profile-out).
"""


def main(argv=None):
    """Runs the job with the command line argv (default sys.argv[1:]);
    returns the exit status."""
    import sys
    from autoinfra.train import job
    return job.main(sys.argv[1:] if argv is None else list(argv))
