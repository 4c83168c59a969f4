"""The experiment: ``forge.yaml`` (:mod:`.config`), ``plugins.lock.json`` (:mod:`.lockfile`,
:mod:`.lock`), hyperparameters and ``--set`` (:mod:`.overrides`), job staging (:mod:`.stage`)."""
