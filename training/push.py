"""``push_to_hub=true``: a trained scorer folder (model, processor, ``sa_iqa.json``, model card) uploaded to a Hub
repo with ``huggingface_hub.HfApi.upload_folder`` -- the scorer only, never the run's checkpoints and optimizer
states. :func:`push_problems` is checked with the other settings, before any model loads.
"""

from __future__ import annotations

import logging
from pathlib import Path

from reward.vlm.hub import is_repo_id

logger = logging.getLogger(__name__)


def push_problems(push: bool, repo_id: str | None) -> list[str]:
    """What stops a push (no repo id, no token, offline), as messages naming the key and the fix; ``[]`` if none.
    The token is the login's or ``HF_TOKEN``, where ``huggingface_hub`` reads it."""
    if not push:
        return []
    if not repo_id:
        return ["push_to_hub=true needs hub_model_id=ORG/NAME (the Hub repo to create or update)"]
    if not is_repo_id(repo_id):
        return [f"hub_model_id={repo_id}: write the Hub repo as ORG/NAME"]
    from huggingface_hub import constants, get_token

    if constants.HF_HUB_OFFLINE:
        return ["push_to_hub=true but HF_HUB_OFFLINE=1 is set: unset it to push, or set push_to_hub=false"]
    if not get_token():
        return ["push_to_hub=true needs a Hugging Face token with write access: run hf auth login or set HF_TOKEN"]
    return []


def push_scorer(folder: str | Path, repo_id: str, *, message: str) -> str:
    """Create ``repo_id`` if needed and upload ``folder`` to it in one commit; returns the commit's URL."""
    from huggingface_hub import HfApi

    api = HfApi()
    api.create_repo(repo_id, exist_ok=True)
    commit = api.upload_folder(repo_id=repo_id, folder_path=str(folder), commit_message=message)
    logger.info("pushed %s to %s (%s)", folder, repo_id, commit)
    return str(commit)
