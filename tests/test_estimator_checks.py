"""scikit-learn's estimator checks on distsvm.LinearSVC and distsvm.LogisticRegression.

Every fit goes through the session's 2-worker LocalCluster (the active client): a
temporary store, a job, a model.  The estimators are made cheap (loose tolerance, few
rounds, silent).  The checks expected to fail are listed with the reason; those that
wait for another branch say which, so the lead can drop them after merging.
"""

from __future__ import annotations

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

import distsvm

# needs issue-7a (weights): class_weight and fit(sample_weight=...) are refused until then.
NEEDS_WEIGHTS = {
    "check_sample_weights_pandas_series": "needs issue-7a (sample_weight)",
    "check_sample_weights_not_an_array": "needs issue-7a (sample_weight)",
    "check_sample_weights_list": "needs issue-7a (sample_weight)",
    "check_sample_weights_shape": "needs issue-7a (sample_weight)",
    "check_sample_weights_not_overwritten": "needs issue-7a (sample_weight)",
    "check_sample_weight_equivalence_on_dense_data": "needs issue-7a (sample_weight)",
    "check_sample_weight_equivalence_on_sparse_data": "needs issue-7a (sample_weight)",
    "check_sample_weights_invariance": "needs issue-7a (sample_weight)",
    "check_classifiers_one_label_sample_weights": "needs issue-7a (sample_weight)",
    "check_all_zero_sample_weights_error": "needs issue-7a (sample_weight)",
    "check_class_weight_classifiers": "needs issue-7a (class_weight)",
    "check_class_weight_balanced_classifiers": "needs issue-7a (class_weight)",
    "check_class_weight_balanced_linear_classifier": "needs issue-7a (class_weight)",
}


def expected_failed_checks(estimator):
    return dict(NEEDS_WEIGHTS)


ESTIMATORS = [distsvm.LinearSVC(tol=0.1, max_iter=30),  # LIBLINEAR -s 1: eps 0.1
              distsvm.LogisticRegression(tol=1e-2, max_iter=100)]


@pytest.mark.filterwarnings("ignore::distsvm.errors.ConvergenceWarning")
@parametrize_with_checks(ESTIMATORS, expected_failed_checks=expected_failed_checks)
def test_sklearn_estimator_checks(estimator, check, client):
    check(estimator)
