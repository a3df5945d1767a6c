"""NeMo AutoModel's own recipe dialect: detected from the file, checked by AutoModel's rules, never imported.

``dialect`` tells an AutoModel recipe from a Recipe Advisor config and reads the world it states,
``schema`` holds the sections and keys AutoModel's recipe and config classes take, ``targets`` the
``_target_`` names AutoModel publishes with their keyword names, ``facts`` turns a recipe into the shared
``Facts``, ``rules`` holds AutoModel's mesh and batch rules, and ``validate`` runs them all.
"""
