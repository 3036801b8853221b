"""The compiled templates of what the operator creates, loaded once at start-up."""
from __future__ import annotations

import jinja2
import yaml

from tfop.children.resources import resource_path

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class Templates:
    def __init__(self, directory=None):
        loader = jinja2.FileSystemLoader(str(directory or resource_path("templates")))
        self.env = jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined, autoescape=False)
        self.pod = self.env.get_template("pod.yaml.j2")
        self.service = self.env.get_template("service.yaml.j2")

    def fill(self, template: jinja2.Template, **values) -> dict:
        """The object a template describes for these values."""
        return yaml.load(template.render(**values), Loader=_Loader)
