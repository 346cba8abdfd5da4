"""The worked example of docs/own-app.md: a to-do list app and one task on it."""
