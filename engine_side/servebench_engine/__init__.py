"""Code that runs inside the engine venv, next to vLLM and torch.

servebench's own environment never imports this package: it calls it through the engine
venv's python (`python -m servebench_engine.<module>`). Its source is part of the engine
venv's content key, so a change here rebuilds the venv.
"""
