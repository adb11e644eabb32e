"""Packages for setuptools: pyproject.toml holds everything else.

``zoo_configs/`` stays at the top of the source tree (where zoo users look for YAML files) and ships inside the package
as ``sb3_async.zoo_configs``, so that an installed wheel finds its hyperparameters too.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["sb3_async", "sb3_async.*"]), "sb3_async.zoo_configs"],
    package_dir={"sb3_async.zoo_configs": "zoo_configs"},
)
