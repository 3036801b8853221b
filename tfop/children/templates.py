"""The compiled templates of what the operator creates, loaded once at start-up."""
from __future__ import annotations

import jinja2
import yaml

from tfop.api import codec
from tfop.children.resources import resource_path

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class Templates:
    def __init__(self, directory=None):
        loader = jinja2.FileSystemLoader(str(directory or resource_path("templates")))
        self.env = jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined, autoescape=False)
        self.env.policies["json.dumps_function"] = _tojson
        self.pod = self.env.get_template("pod.yaml.j2")
        self.service = self.env.get_template("service.yaml.j2")

    def fill(self, template: jinja2.Template, **values) -> dict:
        """The object a template describes for these values. The shipped templates are JSON, parsed as
        such; a template written in YAML's block style (a site's own) still works, parsed as YAML."""
        text = template.render(**values)
        if text.lstrip().startswith("{"):
            try:
                return codec.loads(text)
            except ValueError:
                pass
        return yaml.load(text, Loader=_Loader)


def _tojson(value, **_options) -> str:
    return codec.dumps(value).decode()
