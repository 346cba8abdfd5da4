"""The probes behind results pages (docs/results/): one-off measurements that are not a study of
their own, each run from the repository root as ``python -m evaluation.studies.probes.NAME``
(its docstring says what it measures and which page reports it)."""
