"""Clients of Google Cloud Storage and BigQuery: the official libraries, or their local emulators.

``storage_client()`` and ``bigquery_client(project)`` return one client per process and argument
(clients are thread-safe and expensive to make: credential discovery can take seconds). With an
emulator named in the environment (graphstore.runtime.env.emulator_hosts) they use anonymous credentials
and that endpoint; otherwise Application Default Credentials. Imported lazily: local runs never
load the Google libraries.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

from graphstore.runtime.env import emulator_hosts

if TYPE_CHECKING:  # pragma: no cover
    from google.cloud import bigquery, storage

EMULATOR_PROJECT = "local-emulator"


def _emulator(service: str) -> str | None:
    return emulator_hosts(os.environ).get(service)


@functools.lru_cache(maxsize=4)
def _storage_client(endpoint: str | None) -> "storage.Client":
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    if endpoint:  # the client reads STORAGE_EMULATOR_HOST itself
        return storage.Client(project=EMULATOR_PROJECT, credentials=AnonymousCredentials())
    return storage.Client()


def storage_client() -> "storage.Client":
    """The Cloud Storage client (the emulator's when ``STORAGE_EMULATOR_HOST`` is set)."""
    return _storage_client(_emulator("storage"))


@functools.lru_cache(maxsize=4)
def _bigquery_client(project: str, endpoint: str | None) -> "bigquery.Client":
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import bigquery

    if endpoint:
        return bigquery.Client(project=project, credentials=AnonymousCredentials(),
                               client_options=ClientOptions(api_endpoint=endpoint))
    return bigquery.Client(project=project)


def bigquery_client(project: str) -> "bigquery.Client":
    """The BigQuery client for ``project`` (the emulator's when ``BIGQUERY_EMULATOR_HOST`` is set)."""
    return _bigquery_client(project, _emulator("bigquery"))
