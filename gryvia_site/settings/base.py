"""Gryvia settings: the core, then one module per integration (database, cache/channels, DRF, OAuth, Celery, ...)."""

from .components.billing import *  # noqa: F403
from .components.celery import *  # noqa: F403
from .components.cluster import *  # noqa: F403
from .components.core import *  # noqa: F403
from .components.database import *  # noqa: F403
from .components.drf import *  # noqa: F403
from .components.llm import *  # noqa: F403
from .components.logging import *  # noqa: F403
from .components.oauth import *  # noqa: F403
from .components.oidc import *  # noqa: F403
from .components.redis import *  # noqa: F403
from .components.stripe import *  # noqa: F403
from .components.webhooks import *  # noqa: F403
