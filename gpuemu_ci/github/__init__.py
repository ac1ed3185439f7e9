"""The GitHub side: the REST API client (the only code in gpuemu-ci that talks to the network) and the run's
identity from the runner's environment (``context``).

- ``client``: ``GitHubClient``, a small httpx REST client (pagination, redirects without the
  token); ``retry`` holds GitHub's retry rules and ``api_errors`` the typed errors, which never
  carry the token; ``limits`` the bounds every exchange keeps (deadlines, one budget for all of the
  API work, a byte cap per endpoint) and ``exchange`` one bounded attempt (streamed, abandoned at its
  deadline or at a signal).
- ``artifacts``: find the base branch's ``gpuemu-baseline`` artifact and download it; ``safezip``
  unpacks it without letting an entry escape or a zip bomb fill the disk.
- ``comments``: one sticky PR comment per job, found by a hidden marker.
- ``issues``: the nightly run's one-issue-per-failing-op bookkeeping.
"""
