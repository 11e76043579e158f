"""Prints, as one JSON object, every run of an MLflow experiment as MLflow's own Python
client reads it back: status, times, params, tags and each metric's full history.
   mlflow_dump.py TRACKING_URI EXPERIMENT
Run with the MLflow venv's python (deploy/install-mlflow.sh); used by mlflow_test.cc."""
import json
import math
import sys

from mlflow.tracking import MlflowClient


def number(v):
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def main():
    uri, name = sys.argv[1], sys.argv[2]
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(name)
    out = {"runs": []}
    if experiment is not None:
        for run in client.search_runs([experiment.experiment_id], max_results=1000):
            metrics = {}
            for key in run.data.metrics:
                history = client.get_metric_history(run.info.run_id, key)
                metrics[key] = [[m.step, m.timestamp, number(m.value)] for m in history]
            out["runs"].append({
                "run_id": run.info.run_id,
                "run_name": run.info.run_name,
                "status": run.info.status,
                "start_time": run.info.start_time,
                "end_time": run.info.end_time,
                "params": run.data.params,
                "tags": run.data.tags,
                "metrics": metrics,
            })
    print(json.dumps(out))


if __name__ == "__main__":
    main()
