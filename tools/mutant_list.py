"""The mutants of tools/mutants.py: each a one-line breaking change and the tests that catch it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Mutant:
    """One breaking change: ``old`` (a line's text, found exactly once) becomes ``new``."""

    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]  # pytest node ids or files that must fail

    def apply(self, root: Path) -> str | None:
        """Write the change under ``root``; return the original text, or None if stale."""
        target = root / self.path
        text = target.read_text() if target.is_file() else ""
        if text.count(self.old) != 1:
            return None
        target.write_text(text.replace(self.old, self.new))
        return text


KSERVE = "tests/components/test_kserve.py"
BUILDERS = "tests/components/test_builders.py"
PREDICTOR = "tests/serving/test_predictor.py"
MUTANTS = [
    # The deploy step's waits (components/runtime/kserve.py).
    Mutant(
        "knative-partial-traffic",
        "components/runtime/kserve.py",
        "and traffic == 100",
        "and traffic > 0",
        (f"{KSERVE}::test_a_knative_rollout_is_not_done_while",),
    ),
    Mutant(
        "standard-old-replica-ignored",
        "components/runtime/kserve.py",
        "and (status.replicas or 0) == desired",
        "and True",
        (f"{KSERVE}::test_a_standard_rollout_is_not_done_while",),
    ),
    Mutant(
        "standard-availability-ignored",
        "components/runtime/kserve.py",
        "and (status.available_replicas or 0) == desired",
        "and True",
        (f"{KSERVE}::test_a_standard_rollout_is_not_done_while",),
    ),
    Mutant(
        "standard-generation-ignored",
        "components/runtime/kserve.py",
        "(status.observed_generation or 0) >= (deployment.metadata.generation or 0)",
        "True",
        (f"{KSERVE}::test_a_redeploy_waits_for_the_new_model_not_the_old_ready",),
    ),
    Mutant(
        "crash-loop-unseen",
        "components/runtime/kserve.py",
        "if status.name == PREDICTOR_CONTAINER and reason:",
        "if False:",
        (f"{KSERVE}::test_a_new_predictor_that_crash_loops_fails_the_step_with_its_log",),
    ),
    Mutant(
        "storage-uri-without-slash",
        "trainer/model_dir.py",
        'return f"pvc://{pvc}/{path}"',
        'return f"pvc://{pvc}{path}"',
        (
            f"{KSERVE}::test_first_deploy_writes_the_mode_this_kserve_knows_and_waits_for_the_rollout",
        ),
    ),
    # GPU resource names on every object.
    Mutant(
        "trainjob-ignores-mig",
        "components/specs/trainjob.py",
        '"resourcesPerNode": job_resources(job),',
        '"resourcesPerNode": job_resources(type(job)(**{**job.to_dict(), '
        '"gpu_resource": "nvidia.com/gpu"})),',
        (
            f"{BUILDERS}::test_trainjob_v2_3_variants_are_valid_restricted_and_sized",
            f"{BUILDERS}::test_trainjob_v2_1_variants_are_valid_for_kubeflow_1_11",
        ),
    ),
    Mutant(
        "katib-trainjob-trials-ignore-mig",
        "components/specs/trainjob.py",
        '"resourcesPerNode": job_resources(job),',
        '"resourcesPerNode": job_resources(type(job)(**{**job.to_dict(), '
        '"gpu_resource": "nvidia.com/gpu"})),',
        ("tests/components/test_katib.py::test_trials_ask_for_the_gpu_resource_of_the_job",),
    ),
    Mutant(
        "pytorchjob-ignores-gpu-resource",
        "components/specs/pods.py",
        "return resources(job.cpu, job.memory, job.gpus_per_worker, job.gpu_resource)",
        "return resources(job.cpu, job.memory, job.gpus_per_worker)",
        (f"{BUILDERS}::test_pytorchjob_variants_are_valid_restricted_and_sized",),
    ),
    Mutant(
        "isvc-drops-serving-gpu-resource",
        "components/specs/inferenceservice.py",
        "serving.serving_gpus,\n            serving.serving_gpu_resource,",
        "serving.serving_gpus,",
        (f"{BUILDERS}::test_the_predictor_asks_for_the_serving_gpu_resource",),
    ),
    # The predictor's outputs.
    Mutant(
        "v1-probabilities-reversed",
        "serving/codec.py",
        "for label, row in zip(labels, probabilities.tolist(), strict=True)",
        "for label, row in zip(labels, probabilities[:, ::-1].tolist(), strict=True)",
        (f"{PREDICTOR}::test_v1_batch_is_one_forward_pass",),
    ),
    Mutant(
        "v2-probabilities-reversed",
        "serving/codec.py",
        "data=probabilities.ravel().tolist()",
        "data=probabilities[:, ::-1].ravel().tolist()",
        (f"{PREDICTOR}::test_v2_batch_is_one_forward_pass",),
    ),
    Mutant(
        "log-probabilities-served",
        "serving/predictor.py",
        "return self.net(inputs).exp().cpu().numpy()",
        "return self.net(inputs).cpu().numpy()",
        (f"{PREDICTOR}::test_grpc_raw_tensor",),
    ),
    # The gate (components/runtime/gate.py).
    Mutant(
        "gate-strictly-above",
        "components/runtime/gate.py",
        "if not accuracy >= min_accuracy:",
        "if not accuracy > min_accuracy:",
        (
            "tests/pipelines/test_gate.py::test_the_gate_deploys_a_model_that_reaches_min_accuracy",
            "tests/components/test_gate.py",
        ),
    ),
    Mutant(
        "gate-tie-with-champion-fails",
        "components/runtime/gate.py",
        "if accuracy - champion.accuracy >= min_improvement - TOLERANCE:",
        "if accuracy - champion.accuracy >= min_improvement + TOLERANCE:",
        ("tests/components/test_gate.py", "tests/components/test_champion.py"),
    ),
    Mutant(
        "gate-no-rounding-tolerance",
        "components/runtime/gate.py",
        "if accuracy - champion.accuracy >= min_improvement - TOLERANCE:",
        "if accuracy - champion.accuracy >= min_improvement:",
        ("tests/components/test_gate.py",),
    ),
    # The training job and the launcher.
    Mutant(
        "launcher-success-on-failed",
        "components/runtime/job_wait.py",
        'raise JobFailed(f"{self.what} failed{where}.\\n{self.describe()}")',
        "return found",
        (
            "tests/components/test_launcher.py"
            "::test_a_failed_job_fails_the_step_with_its_conditions_and_log_tail",
        ),
    ),
    Mutant(
        "multikueue-worker-never-looked-up",
        "components/runtime/watchers/multikueue.py",
        "if self.placed or poll.job.kind.manager(poll.found) != MULTIKUEUE:",
        "if True:",
        (
            "tests/components/test_launcher.py"
            "::test_without_a_kubeconfig_for_the_worker_the_step_says_where_the_log_is",
        ),
    ),
    Mutant(
        "queue-label-off-the-job",
        "components/specs/pytorchjob.py",
        "metadata=V1ObjectMeta(name=name, namespace=namespace, labels=kueue_labels(job)),",
        "metadata=V1ObjectMeta(name=name, namespace=namespace),",
        (f"{BUILDERS}::test_pytorchjob_single_node_exact_object",),
    ),
    Mutant(
        "capabilities-kept",
        "components/specs/pods.py",
        '"capabilities": {"drop": ["ALL"]},',
        '"capabilities": {},',
        ("tests/cli/test_sweep.py::test_apply_stages_the_data_with_a_restricted_pod_first",),
    ),
    Mutant(
        "objective-minimized",
        "components/specs/katib_experiment.py",
        '"type": "maximize",',
        '"type": "minimize",',
        (
            "tests/components/test_katib_experiment.py"
            "::test_default_sweep_is_the_documented_experiment",
        ),
    ),
    Mutant(
        "schema-lookup-unclear",
        "components/runtime/discovery.py",
        'raise ClusterMismatch(f"the API server publishes no schema for {resource.kind}")',
        "return {}",
        ("tests/components/test_discovery.py::test_a_missing_schema_is_a_clear_error",),
    ),
    Mutant(
        "local-sweep-one-too-many",
        "components/runtime/local_sweep.py",
        "while pending and len(running) < config.parallel_trials:",
        "while pending and len(running) <= config.parallel_trials:",
        (
            "tests/pipelines/test_local_sweep.py"
            "::test_runs_every_trial_with_bounded_parallelism_and_ranks_them",
        ),
    ),
    # The trainer.
    Mutant(
        "no-all-reduce",
        "trainer/distributed.py",
        "        dist.all_reduce(values)",
        "        pass",
        ("tests/trainer/test_train.py::test_two_ranks_evaluate_like_one",),
    ),
    Mutant(
        "resume-without-optimizer-state",
        "trainer/train.py",
        'self.optimizer.load_state_dict(state["optimizer"])',
        "pass",
        ("tests/trainer/test_train.py::test_killed_run_resumes_from_last_epoch",),
    ),
    Mutant(
        "every-rank-its-own-shuffle",
        "trainer/train.py",
        "context.world_size, context.rank, seed=config.seed",
        "context.world_size, context.rank, seed=config.seed + context.rank",
        ("tests/trainer/test_batches.py::test_shards_of_all_ranks_cover_the_data_once_per_epoch",),
    ),
    Mutant(
        "same-shuffle-every-epoch",
        "trainer/train.py",
        "self.sampler.set_epoch(epoch)",
        "self.sampler.set_epoch(0)",
        ("tests/trainer/test_batches.py::test_shards_of_all_ranks_cover_the_data_once_per_epoch",),
    ),
    Mutant(
        "metric-line-3-decimals",
        "trainer/metrics.py",
        'f"{{metricName: loss, metricValue: {loss:.4f}}}"',
        'f"{{metricName: loss, metricValue: {loss:.3f}}}"',
        ("tests/trainer/test_metrics.py",),
    ),
    Mutant(
        "metric-time-without-fraction",
        "trainer/metrics.py",
        'f"{stamp:%Y-%m-%dT%H:%M:%S.%f}Z "',
        'f"{stamp:%Y-%m-%dT%H:%M:%S}Z "',
        (
            "tests/trainer/test_metrics.py::test_a_metric_line_without_a_time_given_carries_the_clocks",
        ),
    ),
    Mutant(
        "raw-checksum-skipped",
        "trainer/data.py",
        "if expected_sha256 and hashlib.sha256(raw).hexdigest() != expected_sha256:",
        "if False:",
        ("tests/trainer/test_data.py::test_wrong_content_fails_the_checksum",),
    ),
    Mutant(
        "packed-checksum-skipped",
        "trainer/data.py",
        'if verify and _sha256_file(path) != manifest["files"].get(path.name):',
        "if False:",
        ("tests/trainer/test_data.py::test_tampered_packed_array_is_rejected",),
    ),
    Mutant(
        "bf16-where-emulated",
        "trainer/step.py",
        "return torch.bfloat16 if native else None",
        "return torch.bfloat16",
        (
            "tests/trainer/test_train.py::test_mixed_precision_choice",
            "tests/trainer/test_train.py::test_auto_precision_on_a_cpu_follows_what_onednn_reports",
        ),
    ),
    Mutant(
        "flag-without-help",
        "trainer/config.py",
        "parser.add_argument(flag, type=kind, default=default, choices=choices, help=help)",
        "parser.add_argument(flag, type=kind, default=default, choices=choices)",
        ("tests/trainer/test_config.py::test_every_flag_is_documented_in_help",),
    ),
    Mutant(
        "trainer-default-epochs-drift",
        "trainer/config.py",
        'epochs: int = _flag(10, "passes over the training set")',
        'epochs: int = _flag(12, "passes over the training set")',
        (
            "tests/components/test_params.py::test_training_defaults_follow_the_trainer",
            "tests/pipelines/test_parameters.py::test_training_defaults_come_from_the_trainer_config",
        ),
    ),
    # Karmada: each job whole in one member, sized by what is free (components/specs/karmada.py;
    # the karmada tier test_karmada.py shows what each part does on a real Karmada).
    Mutant(
        "karmada-job-in-every-member",
        "components/specs/karmada.py",
        '"spreadConstraints": [{"spreadByField": "cluster", "minGroups": 1, "maxGroups": 1}],',
        "",
        (
            "tests/k8s/test_render.py::test_karmada_policy_for_the_given_clusters",
            "tests/k8s/test_manifests.py::test_karmada_policy_is_what_the_builder_makes",
        ),
    ),
    Mutant(
        "karmada-blind-to-free-capacity",
        "components/specs/karmada.py",
        '"replicaDivisionPreference": "Aggregated",',
        '"replicaDivisionPreference": "Weighted",',
        ("tests/k8s/test_render.py::test_karmada_policy_for_the_given_clusters",),
    ),
]
