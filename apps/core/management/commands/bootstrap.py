"""First-start set-up (idempotent): the public OAuth clients of the `gryvia` CLI, then each app's bootstrap steps
(apps.core.lifecycle, registered in the apps' AppConfig.ready()): the packaged local models registered as shared
inference services when the models extra is installed (apps.llm), and on the first run an admin login and a `demo`
tenant with an admin API key, printed once and written to $GRYVIA_DATA_DIR/demo-credentials.json (apps.tenants.demo).

The apps' actions are flags that do one thing instead: `--print-demo-key` prints the demo key alone (for
`KEY=$(...)`), `--rotate-demo-key` replaces it (apps.tenants.demo).
"""

from django.core.management.base import BaseCommand

from apps.core.lifecycle import bootstrap_actions, bootstrap_steps

CLI_CLIENT_ID = "gryvia-cli"
CLI_DEVICE_CLIENT_ID = "gryvia-cli-device"


class Command(BaseCommand):
    help = "Create the CLI's OAuth clients and what each app sets up on first start (idempotent)."

    def add_arguments(self, parser) -> None:
        what = parser.add_mutually_exclusive_group()
        for action in bootstrap_actions():
            what.add_argument(f"--{action.name}", action="store_true", help=action.help_text)

    def handle(self, *args, **options) -> None:
        for action in bootstrap_actions():
            if options.get(action.name.replace("-", "_")):
                action.run(self.stdout)
                return
        self._ensure_cli_application()
        for step in bootstrap_steps():
            step.run(self.stdout)

    def _ensure_cli_application(self) -> None:
        """The public OAuth clients the `gryvia` CLI logs in with: authorization code + PKCE, and the device flow."""
        from oauth2_provider.models import get_application_model

        Application = get_application_model()
        Application.objects.get_or_create(
            client_id=CLI_DEVICE_CLIENT_ID,
            defaults={
                "name": "Gryvia CLI (device flow)",
                "client_type": Application.CLIENT_PUBLIC,
                "authorization_grant_type": Application.GRANT_DEVICE_CODE,
                "algorithm": Application.RS256_ALGORITHM,
            },
        )
        Application.objects.get_or_create(
            client_id=CLI_CLIENT_ID,
            defaults={
                "name": "Gryvia CLI",
                "client_type": Application.CLIENT_PUBLIC,
                "authorization_grant_type": Application.GRANT_AUTHORIZATION_CODE,
                "redirect_uris": "http://127.0.0.1/callback http://localhost/callback",
                "skip_authorization": False,
                "algorithm": Application.RS256_ALGORITHM,
            },
        )
