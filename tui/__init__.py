"""The distlaunch dashboard: a Textual app that shows a job's event stream and acts on it."""
