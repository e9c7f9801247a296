"""A model's versions listed in TorchServe's order (``GET /models/NAME/all``): its frontend keeps them in a Java
``ConcurrentHashMap``, whose order Java itself says (Java 17 runs TorchServe here); a register call's model name
that cannot name a URL is refused before anything is opened."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from msnb.engines.ray.model_registry import Registry, RegistryError, java_order
from msnb.engines.ts_properties import read

JAVA_ORDER = """
import java.util.concurrent.ConcurrentHashMap;

public class Order {
    public static void main(String[] versions) {
        ConcurrentHashMap<String, Integer> registered = new ConcurrentHashMap<>();
        for (String version : versions) registered.put(version, 1);
        System.out.println(String.join(" ", registered.keySet()));
    }
}
"""


def test_a_models_versions_are_listed_in_the_order_torchserves_java_map_keeps_them(tmp_path: Path):
    versions = ["1.0", "2.0", "10.0", "1.1", "0.9", "3", "2.5", "11.0"]  # registration order
    (tmp_path / "Order.java").write_text(JAVA_ORDER)
    java = subprocess.run(["java", "Order.java", *versions], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert java.returncode == 0, java.stderr
    assert java_order(versions) == java.stdout.split() != sorted(versions)


@pytest.mark.parametrize("name", ["a@b", "a/b", "-dash"])
def test_a_model_name_that_cannot_name_its_urls_is_refused_with_a_hint(name):
    with pytest.raises(RegistryError) as err:
        Registry(engine=None, config=read(None), opener=None).register("klass.mar", name)
    assert err.value.status == 400 and f"Model name {name!r} is not valid" in str(err.value)
    assert "Hint: give model_name letters, digits" in str(err.value)
