"""The GitHub-facing layer: the only code in gpuemu-ci that talks to the network.

- ``client``: ``GitHubClient``, a small httpx REST client (pagination, redirects without the
  token); ``retry`` holds GitHub's retry rules and ``api_errors`` the typed errors, which never
  carry the token.
- ``context``: ``ActionContext.from_env(env)``, the run's identity from ``GITHUB_*``, ``INPUT_*``
  and the event payload.
- ``artifacts``: find the base branch's ``gpuemu-baseline`` artifact and download it; ``safezip``
  unpacks it without letting an entry escape or a zip bomb fill the disk.
- ``comments``: one sticky PR comment per job, found by a hidden marker.
- ``issues``: the nightly run's one-issue-per-failing-op bookkeeping.
- ``commands``: workflow commands (annotations, masks) and the ``GITHUB_OUTPUT`` /
  ``GITHUB_STEP_SUMMARY`` files.
"""
