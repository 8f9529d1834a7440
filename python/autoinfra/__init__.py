"""autoinfra from Python. `import autoinfra.torch` registers the
torch.distributed backend "autoinfra" (docs/torch.md)."""
