"""`msnb shadow`: a front before a running TorchServe (the primary) that answers from it, mirrors each request to a
candidate serving the same archives (Ray Serve, or any TorchServe-compatible address), compares every pair of answers,
and moves traffic by a canary share and a cutover; the primary's answers never wait for the candidate."""
