"""The engine served over HTTP in both forms of the spec, with keys, credits, jobs and webhooks."""

#: Where each form is mounted on the server root (PRODUCT.md); job URLs include it.
FORM_A_ROOT = "/a/v1"
FORM_B_ROOT = "/b/v1"
