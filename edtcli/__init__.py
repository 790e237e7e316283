"""`edt`: EDT's command-line client, over the REST API (see docs/api.md)."""
