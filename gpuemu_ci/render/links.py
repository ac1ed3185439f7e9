"""Where the full report lives, for links from every rendering."""

from __future__ import annotations

from dataclasses import dataclass

from gpuemu_ci.render.escape import safe_url
from gpuemu_ci.results.model import Results


@dataclass(frozen=True)
class Links:
    """Where the full report lives. Only absolute http(s) URLs are kept (`escape.safe_url`); anything
    else becomes None, and no link is shown."""

    run_url: str | None = None
    artifact_url: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "run_url", safe_url(self.run_url))
        object.__setattr__(self, "artifact_url", safe_url(self.artifact_url))

    @classmethod
    def for_results(
        cls, results: Results, run_url: str | None = None, artifact_url: str | None = None
    ) -> Links:
        """The given URLs; without a run URL, the run's page derived from the document's `run` section."""
        if safe_url(run_url) is None and results.run is not None:
            run_url = results.run.url()
        return cls(run_url, artifact_url)
