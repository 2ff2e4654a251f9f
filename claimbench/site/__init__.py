"""The scoreboard site: jinja2 templates and matplotlib charts rendered to self-contained HTML."""
