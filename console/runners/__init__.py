"""The runners in the console (SPEC §23.1): the machines of the fleet, their slots, and the levers on them.

The list and its admin actions (`admin.py`), the detail page of one runner with its slots and
events (`detail.py`), and the confirmed, audited actions both reach (`actions.py`): cordon,
uncordon, drain, undrain, cancel a slot's attempt and rotate the runner's token, each through
`runners.services`.
"""
