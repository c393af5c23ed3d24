"""The questions a report shows beside each set's answers: from the dataset the set was scored on.

Every ``<set>.settings.json`` records ``dataset_sha256``, the identity of the items it was scored against
(`store.dataset_identity`), never where they lay. The report loads the dataset it is given (``--dataset``,
$CS3_BENCH_DATASET); without one it tries the embedded demo set and the Hub dataset when it is in the local
Hugging Face cache, and takes the one whose identity is the runs'. Where no dataset is found, or the one given
is not the runs', the note says so and what to pass: the Items view shows it above the table.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from cs3_tasks.core import data
from cs3_tasks.scoring.store import dataset_identity


def hub_dataset_cached(repo_id: str = data.HUB_DATASET) -> bool:
    """The Hub dataset's files are in the local Hugging Face cache (no network asked)."""
    from huggingface_hub import constants

    return (Path(constants.HF_HUB_CACHE) / f"datasets--{repo_id.replace('/', '--')}").is_dir()


def candidates(given: str | None) -> list[str]:
    """The datasets to look in: the one given, else the embedded demo set and the cached Hub dataset."""
    if given:
        return [given]
    return [data.DEMO] + ([data.HUB_DATASET] if hub_dataset_cached() else [])


def _short(identity: str) -> str:
    return identity[:12] + "..."


def find_docs(set_name: str, given: str | None, identities: Iterable[str]) -> tuple[str | None, str | None]:
    """(the dataset location whose items to show, a note for the reader) for one set, whose runs recorded
    ``identities`` (none: results from before identities were recorded; a dataset given is then taken)."""
    scored = sorted(set(identities))
    if not given and not scored:
        return None, (
            f"{set_name}: questions not shown: these results do not say which dataset they were scored on; "
            f"pass --dataset (a build folder, a source JSON, 'demo' or a Hub id) or set ${data.DATASET_ENV}"
        )
    tried = []
    for location in candidates(given):
        try:
            found = dataset_identity(data.load_docs(set_name, location))
        except Exception as exc:  # noqa: BLE001 - the report is still useful without the questions
            tried.append(f"{location}: {type(exc).__name__}: {exc}")
            continue
        if not scored or found in scored:
            return location, None
        if given:
            theirs = ", ".join(map(_short, scored))
            return location, (
                f"{set_name}: the questions shown are from {location} (sha256 {_short(found)}), which is not "
                f"the dataset these runs were scored on (sha256 {theirs}): pass --dataset with that one"
            )
        tried.append(f"{location}: another dataset (sha256 {_short(found)})")
    looked = "; ".join(tried) or "nothing to look in"
    theirs = ", ".join(map(_short, scored))
    return None, (
        f"{set_name}: questions not shown: the dataset these runs were scored on (sha256 {theirs}) was not "
        f"found ({looked}); pass --dataset with the build folder, source JSON or Hub id they were scored on "
        f"(or set ${data.DATASET_ENV})"
    )
