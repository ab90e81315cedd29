"""The engine served over HTTP in both forms of the spec, with keys, credits, jobs and webhooks."""
