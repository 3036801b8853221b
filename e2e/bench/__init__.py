"""The benchmarks: a burst of TFJobs across operators (burst.py, `python -m e2e.bench`), real
training's time to its first step (training.py), gang scheduling under contention (contention.py,
`python -m e2e.bench.contention`) and the installed operator's start figures (operator_figures.py).
"""
