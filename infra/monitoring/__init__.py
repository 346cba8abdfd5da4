"""Monitoring assets: alert rules, Grafana dashboards and provisioning, live query checks."""
