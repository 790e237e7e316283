from django.db import migrations


def make_default(apps, schema_editor):
    """The ``default`` group always exists: every slot no rule takes is in it."""
    group = apps.get_model("tenancy", "ResourceGroup")
    group.objects.get_or_create(name="default", defaults={"position": 0, "rules": []})


class Migration(migrations.Migration):
    dependencies = [("tenancy", "0001_initial")]

    operations = [migrations.RunPython(make_default, migrations.RunPython.noop)]
