"""The plugin templates ``forge plugin init`` renders (data only; see starforge.authoring.init)."""
