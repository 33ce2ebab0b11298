from .api_key import ApiKey
from .membership import Membership
from .tenant import Tenant

__all__ = ["ApiKey", "Membership", "Tenant"]
