"""Record kinds mnemostore ships for applications, declared with the public mechanism only.

Importing a module registers its kinds (`import mnemostore.kinds.workflow`); nothing is
registered until then, so their names stay free for an application that declares its own.
"""
