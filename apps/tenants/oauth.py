"""The OAuth2/OIDC validator: ID tokens and userinfo carry the user's tenant memberships."""

from __future__ import annotations

from typing import Any

from oauth2_provider.oauth2_validators import OAuth2Validator

from .selectors import memberships_of_user


class GryviaOAuth2Validator(OAuth2Validator):
    oidc_claim_scope = None  # every claim below is returned for the openid scope

    def get_additional_claims(self, request: Any) -> dict[str, Any]:
        user = request.user
        return {
            "preferred_username": user.get_username(),
            "email": user.email,
            "memberships": [
                {"tenant": m.tenant.slug, "role": m.role}
                for m in memberships_of_user(user_id=user.pk).select_related("tenant").order_by("tenant__slug")
            ],
        }
