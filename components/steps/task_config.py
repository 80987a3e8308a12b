"""What the train and tune steps pass through to the pods they create, on either backend.

On Kubeflow Pipelines >= 2.15 a step declares ``task_config_passthroughs`` and takes a
``dsl.TaskConfig`` input: the driver hands it the task's volumes (the run's workspace
among them), env, tolerations, node selector and affinity. Older backends refuse both:
KFP 2.5's API server reads an uploaded pipeline with plain ``protojson.Unmarshal``
(kubeflow/pipelines ``backend/src/apiserver/template/v2_template.go``,
``NewV2SpecTemplate``), and its pipeline spec knows neither the ``taskConfigPassthroughs``
field nor the ``TASK_CONFIG`` parameter type that kfp 2.17 compiles a TaskConfig input to
(``compiler/pipeline_spec_builder.py``, ``_build_component_spec_from_component_spec_structure``).
So the pvc variant compiles the same step ``without_task_config``; it is told its PVC.
"""

import dataclasses

from kfp import dsl
from kfp.dsl.python_component import PythonComponent
from kfp.dsl.types.type_utils import is_task_config_type

# The task's volumes (the run's workspace among them) and env reach the job and stay on
# the task's own pod; tolerations, node selector and affinity set on the task are meant
# for the job's (GPU) pods only. The task's CPU and memory are its own pod's alone (the job
# sizes its pods itself): a component that declares passthroughs gets them on its pod only
# if RESOURCES is one of them with apply_to_task (kubeflow/pipelines 2.15.0
# backend/src/v2/driver/driver.go, getTaskConfigOptions), and kfp 2.17 refuses to compile
# a task with resources otherwise (compiler/pipeline_spec_builder.py).
PASSTHROUGHS = [
    dsl.TaskConfigPassthrough(field=dsl.TaskConfigField.KUBERNETES_VOLUMES, apply_to_task=True),
    dsl.TaskConfigPassthrough(field=dsl.TaskConfigField.ENV, apply_to_task=True),
    dsl.TaskConfigPassthrough(field=dsl.TaskConfigField.RESOURCES, apply_to_task=True),
    dsl.TaskConfigField.KUBERNETES_TOLERATIONS,
    dsl.TaskConfigField.KUBERNETES_NODE_SELECTOR,
    dsl.TaskConfigField.KUBERNETES_AFFINITY,
]


def without_task_config(component: PythonComponent) -> PythonComponent:
    """The same step with no TaskConfig input and no passthroughs: what KFP < 2.15 accepts.

    The step's function still has its ``task_config`` parameter: kfp's executor passes an
    empty ``TaskConfig`` when the backend sends none (kfp 2.17 ``dsl/executor.py``).
    """
    spec = component.component_spec
    inputs = {
        name: item for name, item in spec.inputs.items() if not is_task_config_type(item.type)
    }
    older = dataclasses.replace(spec, inputs=inputs, task_config_passthroughs=None)
    return PythonComponent(older, component.python_func)
