# Invoices (Invoice, InvoiceLine, the per-tenant InvoiceCounter) and chargeback's cost centers
# (CostCenter, TenantCostCenter). apps/billing/models/invoices.py, apps/billing/models/cost_centers.py.

import django.core.validators
import django.db.models.deletion
import django.db.models.manager
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0002_triggers"),
        ("tenants", "0003_llm_limits"),
    ]

    operations = [
        migrations.CreateModel(
            name="CostCenter",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("created_at", models.DateTimeField(auto_now_add=True, db_index=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "code",
                    models.CharField(
                        max_length=63,
                        unique=True,
                        validators=[
                            django.core.validators.RegexValidator(
                                "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", "lowercase letters, digits and '-'"
                            )
                        ],
                    ),
                ),
                ("name", models.CharField(max_length=200)),
                (
                    "overhead_percent",
                    models.DecimalField(
                        decimal_places=3,
                        default=0,
                        help_text="platform overhead added to the tenants' amounts, in percent (0 to 1000)",
                        max_digits=7,
                        validators=[
                            django.core.validators.MinValueValidator(0),
                            django.core.validators.MaxValueValidator(1000),
                        ],
                    ),
                ),
                ("description", models.CharField(blank=True, default="", max_length=500)),
            ],
            options={
                "ordering": ("code",),
            },
        ),
        migrations.CreateModel(
            name="Invoice",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "state",
                    models.CharField(
                        choices=[("draft", "Draft"), ("finalized", "Finalized"), ("paid", "Paid"), ("void", "Void")],
                        default="draft",
                        max_length=10,
                    ),
                ),
                (
                    "sequence",
                    models.PositiveIntegerField(blank=True, help_text="1, 2, … per tenant, at finalization", null=True),
                ),
                (
                    "number",
                    models.CharField(blank=True, help_text="INV-<slug>-NNNNNN", max_length=80, null=True, unique=True),
                ),
                ("period_start", models.DateTimeField()),
                ("period_end", models.DateTimeField(help_text="exclusive")),
                (
                    "currency",
                    models.CharField(
                        blank=True,
                        default="",
                        max_length=3,
                        validators=[
                            django.core.validators.RegexValidator("^[A-Z]{3}$", "an ISO 4217 code such as USD")
                        ],
                    ),
                ),
                (
                    "subtotal",
                    models.DecimalField(
                        decimal_places=6, default=0, help_text="the sum of the rounded line amounts", max_digits=20
                    ),
                ),
                ("ledger_entries", models.PositiveIntegerField(default=0)),
                ("ledger_first_sequence", models.PositiveBigIntegerField(blank=True, null=True)),
                ("ledger_last_sequence", models.PositiveBigIntegerField(blank=True, null=True)),
                ("ledger_head_sequence", models.PositiveBigIntegerField(default=0)),
                ("ledger_head_hash", models.CharField(blank=True, default="", max_length=64)),
                (
                    "ledger_total",
                    models.DecimalField(
                        decimal_places=6,
                        default=0,
                        help_text="the exact sum of the entries' costs (6 places)",
                        max_digits=20,
                    ),
                ),
                ("note", models.CharField(blank=True, default="", max_length=500)),
                (
                    "computed_at",
                    models.DateTimeField(blank=True, help_text="when the lines were last computed", null=True),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True, db_index=True)),
                ("created_by", models.CharField(blank=True, default="", max_length=200)),
                ("finalized_at", models.DateTimeField(blank=True, null=True)),
                ("finalized_by", models.CharField(blank=True, default="", max_length=200)),
                ("paid_at", models.DateTimeField(blank=True, null=True)),
                ("paid_by", models.CharField(blank=True, default="", max_length=200)),
                ("payment_reference", models.CharField(blank=True, default="", max_length=200)),
                ("voided_at", models.DateTimeField(blank=True, null=True)),
                ("voided_by", models.CharField(blank=True, default="", max_length=200)),
                ("void_reason", models.CharField(blank=True, default="", max_length=500)),
            ],
            options={
                "ordering": ("-period_start", "-id"),
                "default_manager_name": "all_tenants",
            },
            managers=[
                ("all_tenants", django.db.models.manager.Manager()),
            ],
        ),
        migrations.CreateModel(
            name="InvoiceCounter",
            fields=[
                (
                    "tenant",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.PROTECT,
                        primary_key=True,
                        related_name="+",
                        serialize=False,
                        to="tenants.tenant",
                    ),
                ),
                ("last", models.PositiveIntegerField(default=0)),
            ],
        ),
        migrations.CreateModel(
            name="InvoiceLine",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("position", models.PositiveIntegerField()),
                ("kind", models.CharField(max_length=20)),
                ("sku", models.CharField(blank=True, default="", max_length=63)),
                ("model", models.CharField(blank=True, default="", max_length=100)),
                ("description", models.CharField(max_length=300)),
                ("entries", models.PositiveIntegerField()),
                ("gpu_hours", models.DecimalField(decimal_places=6, default=0, max_digits=20)),
                ("input_tokens", models.PositiveBigIntegerField(default=0)),
                ("output_tokens", models.PositiveBigIntegerField(default=0)),
                (
                    "rate",
                    models.DecimalField(
                        blank=True,
                        decimal_places=6,
                        help_text="the single rate of its entries, else amount / GPU-hours",
                        max_digits=20,
                        null=True,
                    ),
                ),
                ("amount_exact", models.DecimalField(decimal_places=6, max_digits=20)),
                ("amount", models.DecimalField(decimal_places=6, max_digits=20)),
                ("currency", models.CharField(max_length=3)),
            ],
            options={
                "ordering": ("invoice", "position"),
            },
        ),
        migrations.CreateModel(
            name="TenantCostCenter",
            fields=[
                (
                    "tenant",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.PROTECT,
                        primary_key=True,
                        related_name="+",
                        serialize=False,
                        to="tenants.tenant",
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "verbose_name": "tenant cost center",
                "ordering": ("cost_center", "tenant"),
            },
        ),
        migrations.AddField(
            model_name="invoice",
            name="tenant",
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="+", to="tenants.tenant"),
        ),
        migrations.AddField(
            model_name="invoiceline",
            name="invoice",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT, related_name="lines", to="billing.invoice"
            ),
        ),
        migrations.AddField(
            model_name="tenantcostcenter",
            name="cost_center",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT, related_name="tenant_links", to="billing.costcenter"
            ),
        ),
        migrations.AddIndex(
            model_name="invoice",
            index=models.Index(fields=["tenant", "period_start"], name="invoice_tenant_period_idx"),
        ),
        migrations.AddConstraint(
            model_name="invoice",
            constraint=models.UniqueConstraint(
                condition=models.Q(("sequence__isnull", False)),
                fields=("tenant", "sequence"),
                name="invoice_number_once",
            ),
        ),
        migrations.AddConstraint(
            model_name="invoice",
            constraint=models.CheckConstraint(
                condition=models.Q(("period_end__gt", models.F("period_start"))), name="invoice_period"
            ),
        ),
        migrations.AddConstraint(
            model_name="invoice",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("state__in", ["draft", "void"]),
                    models.Q(("number__isnull", False), ("sequence__isnull", False)),
                    _connector="OR",
                ),
                name="invoice_numbered_once_final",
            ),
        ),
        migrations.AddConstraint(
            model_name="invoiceline",
            constraint=models.UniqueConstraint(fields=("invoice", "position"), name="invoice_line_position"),
        ),
    ]
