"""`hetflow train buckets`: both predictors' held-out accuracy per bucket, beside the majority share."""

from hetflow.cli import main


def test_the_bucket_predictors_report_per_bucket_accuracy(capsys):
    assert main(["train", "buckets", "--families", "chat,math", "--programs", "30", "--model",
                 "qwen2.5-7b-instruct"]) == 0
    out = capsys.readouterr().out
    assert "edges [256, 2048]" in out and "text_with_task_hint" in out and "forest_on_length_and_application" in out
    assert main(["train", "buckets", "--families", "math", "--programs", "20", "--rate", "500"]) == 0
    assert "edges [250, 1000]" in capsys.readouterr().out
