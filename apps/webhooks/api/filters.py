import django_filters

from ..models import Delivery, WebhookEndpoint


class WebhookEndpointFilterSet(django_filters.FilterSet):
    url = django_filters.CharFilter(lookup_expr="icontains")

    class Meta:
        model = WebhookEndpoint
        fields = ("enabled", "format", "url")


class DeliveryFilterSet(django_filters.FilterSet):
    type = django_filters.CharFilter(field_name="event__type")

    class Meta:
        model = Delivery
        fields = ("status", "type")
