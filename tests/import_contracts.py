"""A custom import-linter contract: an app is reached from another app only through its public face.

`public_face` (registered in `.importlinter`) walks every direct import from one app (`apps.<name>`) into
another that is one of `containers`, and breaks when the imported module is not one of that app's
`public_modules` (its `services`, `selectors`, `models` and `choices`, packages or modules) or the app package
itself. `apps.core`, the framework every app builds on, is not a container: any app may use any of it. The
apps' order (no cycle) is the `layers` contract's job; this one keeps the inside of an app its own.
"""

from __future__ import annotations

import grimp
from importlinter import Contract, ContractCheck, fields, output


class PublicFaceContract(Contract):
    type_name = "public_face"

    containers = fields.ListField(subfield=fields.StringField())
    public_modules = fields.ListField(subfield=fields.StringField())

    def _app_of(self, module: str) -> str | None:
        for container in self.containers:  # type: ignore[attr-defined]
            if module == container or module.startswith(container + "."):
                return container
        return None

    def _is_public(self, app: str, module: str) -> bool:
        if module == app:
            return True
        first = module[len(app) + 1 :].split(".", 1)[0]
        return first in self.public_modules  # type: ignore[attr-defined]

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        broken = []
        for importer in sorted(graph.modules):
            if not importer.startswith("apps."):
                continue
            source_app = ".".join(importer.split(".")[:2])
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                target_app = self._app_of(imported)
                if target_app is None or target_app == source_app or self._is_public(target_app, imported):
                    continue
                lines = [
                    detail["line_number"] for detail in graph.get_import_details(importer=importer, imported=imported)
                ]
                broken.append({"importer": importer, "imported": imported, "lines": lines})
        return ContractCheck(kept=not broken, metadata={"broken": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        public = ", ".join(self.public_modules)  # type: ignore[attr-defined]
        for item in check.metadata["broken"]:
            lines = ", ".join(f"l.{line}" for line in item["lines"])
            output.print_error(f"{item['importer']} -> {item['imported']} ({lines})", bold=False)
        output.new_line()
        output.print(f"Another app's inside is private: import its {public} instead.")
