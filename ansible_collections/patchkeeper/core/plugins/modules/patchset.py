#!/usr/bin/python
"""The documentation of patchkeeper.core.patchset; its work is done by the action plugin of the same name."""

DOCUMENTATION = r"""
---
module: patchset
short_description: Apply a patchkeeper patch set on a host, or take the host back to its baseline
description:
  - Applies patch set O(name) from a patchkeeper workspace on the controller to the host's Python
    package in one transaction (switching out the other member of its group), records it in the
    host's ledger, restarts and verifies the host's service when its table has C(service), and rolls a
    change that fails verification back by itself.
  - The target's table (C(python), C(package), C(files), C(vars), C(service)) is the host or group
    variable C(patchkeeper), on top of the workspace's C([defaults]); a C([targets.HOST]) table of the
    workspace's C(patchkeeper.toml) adds to it.
  - Runs on the controller as an action plugin and reaches the host through the play's own
    connection (C(ssh) or C(local)); with ControlPersist, Ansible's default, no second SSH connection
    is made. The same ledger as the C(patchkeeper) command is written, so C(patchkeeper status -t HOST)
    agrees afterwards.
  - The controller's Python must have patchkeeper installed (C(pip install 'patchkeeper[ansible]')).
version_added: "0.1.0"
author:
  - patchkeeper developers
options:
  name:
    description:
      - The patch set, a directory under the workspace's C(patchsets/).
    type: str
    required: true
  state:
    description:
      - V(present) applies O(name) (a switch within its group, when another member is applied).
      - V(absent) rolls the host back to its baseline when O(name) is applied; nothing when it is not.
    type: str
    choices: [present, absent]
    default: present
  workspace:
    description:
      - The patchkeeper workspace on the controller (a directory holding C(patchkeeper.toml)).
      - Default is E(PATCHKEEPER_WORKSPACE), else the current directory and its parents.
    type: path
  verify:
    description:
      - Restart and verify the host's service after the change, when its table has C(service).
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: Plans the change on the host; nothing is changed.
  diff_mode:
    support: full
    description: Each file the change writes, before and after.
notes:
  - C(become) and password logins are not supported; connect as a user that may write the venv.
requirements:
  - patchkeeper on the controller
"""

EXAMPLES = r"""
- name: Apply ddtree, one host at a time, stopping at the first failure
  hosts: gpus
  serial: 1
  max_fail_percentage: 0
  gather_facts: false
  tasks:
    - name: ddtree on this host
      patchkeeper.core.patchset:
        name: ddtree
        workspace: /srv/patchkeeper

- name: Back to the baseline
  hosts: gpus
  gather_facts: false
  tasks:
    - patchkeeper.core.patchset:
        name: ddtree
        state: absent
        workspace: /srv/patchkeeper
"""

RETURN = r"""
state_before:
  description: The host's recorded state id before the task (null before its first change).
  returned: always
  type: str
  sample: 4dd0f39e24ba
state_after:
  description: The state id after the task (in check mode, the state the change would make).
  returned: always
  type: str
  sample: 6505d2df5a0e
msg:
  description: The host's line, as C(patchkeeper apply --all) reports it, or patchkeeper's error.
  returned: always
  type: str
  sample: "changed and verified: 18 file(s); state 4dd0f39e24ba -> 6505d2df5a0e"
rc:
  description: The exit code C(patchkeeper apply -t HOST) would give (3, failed verification, rolled back).
  returned: always
  type: int
  sample: 0
stdout:
  description: What patchkeeper printed for this host (the plan, the verification).
  returned: always
  type: str
rolled_back:
  description: The failed check of the verification that rolled the change back.
  returned: when a verification failed and the change was rolled back
  type: str
  sample: degenerate
previous_state_fails:
  description: Whether the state rolled back to failed its verification as well.
  returned: when a verification failed and the change was rolled back
  type: bool
verdict:
  description: >-
    "the previous code state fails as well: the fault is likely not in the patch set", or "the patch
    set fails verification" (also in C(msg)).
  returned: when a verification failed and the change was rolled back
  type: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 (after DOCUMENTATION, as Ansible modules are written)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            workspace=dict(type="path"),
            verify=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    module.fail_json(
        msg="patchkeeper.core.patchset runs on the controller as an action plugin; "
        "it was run as a module on the host (is the collection's plugins/action there?)"
    )


if __name__ == "__main__":
    main()
