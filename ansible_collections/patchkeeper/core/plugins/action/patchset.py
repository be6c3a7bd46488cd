"""patchkeeper.core.patchset: patchkeeper's change of one host, run on the controller over the play's connection."""

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

ARGS = dict(
    name=dict(type="str", required=True),
    state=dict(type="str", choices=["present", "absent"], default="present"),
    workspace=dict(type="path"),
    verify=dict(type="bool", default=True),
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        dummy, args = self.validate_argument_spec(argument_spec=ARGS)
        try:
            from patchkeeper.ansible_task import run_task
        except ImportError as exc:
            raise AnsibleError(
                "patchkeeper.core.patchset needs patchkeeper in the controller's Python: "
                "pip install 'patchkeeper[ansible]' (%s)" % exc
            ) from exc
        table = self._templar.template(task_vars.get("patchkeeper", {}))
        if not isinstance(table, dict):
            result.update(
                failed=True, msg="patchkeeper: error: the host variable patchkeeper is not a mapping"
            )
            return result
        host = task_vars.get("inventory_hostname") or self._play_context.remote_addr
        origin = {
            "playbook": self._task.get_path() or "",
            "play": str(task_vars.get("ansible_play_name") or ""),
            "task": self._task.get_name() or "",
        }  # kept in the ledger: `patchkeeper log` shows it
        result.update(
            run_task(
                args["workspace"],
                host,
                dict(table),
                self._connection,
                args["name"],
                args["state"],
                args["verify"],
                bool(self._task.check_mode),
                bool(self._task.diff),
                origin,
            )
        )
        return result
