"""Spec errors in the CLI's words, before anything is sent, and job states printed by
name (no controller needed)."""

import os
import tempfile
import unittest

import trainyard_client as ty


class SpecErrorTest(unittest.TestCase):
    def error(self, spec):
        with self.assertRaises(ty.SpecError) as e:
            ty.spec_from_dict(spec)
        return str(e.exception)

    def test_a_misspelled_key_names_the_key_and_the_close_one(self):
        self.assertEqual(self.error({"training": {"stpes": 5}}),
                         "unknown key training.stpes (did you mean training.steps?)")
        # Far from every key: no guess.
        self.assertEqual(self.error({"training": {"zzzzzzzz": 5}}), "unknown key training.zzzzzzzz")

    def test_a_misspelled_section_lists_the_sections(self):
        message = self.error({"trainig": {"steps": 5}})
        self.assertTrue(message.startswith("unknown section [trainig] (did you mean training?) (known: job, model, "),
                        message)

    def test_a_value_of_the_wrong_type_names_the_field_and_both_types(self):
        self.assertEqual(self.error({"training": {"steps": "five"}}),
                         "training.steps: expected integer, got string 'five'")
        self.assertEqual(self.error({"model": {"dim": 64.5}}), "model.dim: expected integer, got float")
        self.assertEqual(self.error({"job": {"preemptible": 1}}), "job.preemptible: expected boolean, got integer")
        self.assertEqual(self.error({"training": {"steps": True}}), "training.steps: expected integer, got boolean")
        self.assertEqual(self.error({"resources": {"device": 0}}), "resources.device: expected string, got integer")
        self.assertEqual(self.error({"training": 5}), "training: expected a table, got integer")

    def test_ranges_and_non_finite_numbers(self):
        self.assertEqual(self.error({"training": {"steps": 2**31}}),
                         "training.steps: 2147483648 is out of range (must fit in a 32-bit signed integer, "
                         "-2147483648 to 2147483647)")
        self.assertEqual(self.error({"training": {"seed": -1}}),
                         "training.seed: -1 is out of range (must be a non-negative integer)")
        self.assertEqual(self.error({"training": {"lr": float("inf")}}),
                         "training.lr: expected a finite number, got inf")

    def test_unknown_keys_come_before_bad_values(self):
        # The spec core's order: every section and key first, then the values.
        self.assertEqual(self.error({"training": {"steps": "five", "stpes": 5}}),
                         "unknown key training.stpes (did you mean training.steps?)")

    def test_what_a_job_spec_holds_is_accepted(self):
        # Job.spec is a dict from the normalised JobSpec: the 64-bit seed as a decimal
        # string, a float field given an integer, None for "not set".
        spec = ty.spec_from_dict({"model": {"preset": "tiny", "dim": None}, "training": {"seed": "123", "lr": 1},
                                  "job": {"preemptible": True}})
        self.assertEqual(spec.training.seed, 123)
        self.assertEqual(spec.training.lr, 1.0)
        self.assertFalse(spec.model.HasField("dim"))

    def test_a_job_file_and_an_override_are_named(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "job.toml")
            with open(path, "w") as f:
                f.write('[model]\npreset = "tiny"\n[training]\nstpes = 5\n')
            with self.assertRaises(ty.SpecError) as e:
                ty.load_job_file(path)
            self.assertEqual(str(e.exception), f"{path}: unknown key training.stpes (did you mean training.steps?)")
            with open(path, "w") as f:
                f.write('[model]\npreset = "tiny"\n')
            with self.assertRaises(ty.SpecError) as e:
                ty.load_job_file(path, {"training.steps": "five"})
            self.assertEqual(str(e.exception), "override training.steps: expected integer, got string 'five'")
            with self.assertRaises(ty.SpecError) as e:
                ty.load_job_file(path, {"training.stpes": 5})
            self.assertEqual(str(e.exception),
                             "override 'training.stpes': unknown key training.stpes (did you mean training.steps?)")
            with self.assertRaises(ty.SpecError) as e:
                ty.load_job_file(path, {"steps": 5})
            self.assertIn("expected SECTION.KEY", str(e.exception))
            self.assertEqual(ty.load_job_file(path, {"training.steps": 5})["training"], {"steps": 5})


class JobStateTest(unittest.TestCase):
    def test_a_state_prints_as_its_name(self):
        self.assertEqual(str(ty.JobState.SCHEDULED), "SCHEDULED")
        self.assertEqual(f"{ty.JobState.RUNNING}", "RUNNING")
        self.assertEqual(f"[{ty.JobState.FAILED:>8}]", "[  FAILED]")
        self.assertEqual(int(ty.JobState.SCHEDULED), 2)  # still the .proto number
        self.assertEqual(ty.JobState.parse("running"), ty.JobState.RUNNING)


if __name__ == "__main__":
    unittest.main()
