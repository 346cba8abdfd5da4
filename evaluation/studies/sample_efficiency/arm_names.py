"""The sample-efficiency study's arms, by name, and which of them do what: the one list the
study's config checks ``experiment.arms`` against, the cells are configured by
(``evaluation.studies.sample_efficiency.arms``) and the report orders its rows by."""

from __future__ import annotations

ARMS = ("imitation", "imitation_matched", "real_only", "dynaweb", "dynaweb_dream_only")
ONLINE_ARMS = ("real_only", "dynaweb", "dynaweb_dream_only")  # they interact (and run GSPO)
DREAM_ARMS = ("dynaweb", "dynaweb_dream_only")  # a dream generator and an online world model
