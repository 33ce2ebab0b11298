"""OIDC single sign-on (mozilla-django-oidc): the provider's discovery, the authentication backend that turns its
tenant claim into memberships (apps.tenants.services.memberships_sync_from_claims), and the views under /oidc/."""
