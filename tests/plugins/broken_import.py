raise RuntimeError("this plug-in is broken at import")
