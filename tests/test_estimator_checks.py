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

# Class and instance weights (issue 7a) pass every check except, for LinearSVC (dual CD
# at tol=0.1, max_iter=30 here), the equivalence of integer weights with repeated rows to
# scikit-learn's tolerance: the weighted and the repeated problems have the same optimum
# (tests/test_weights.py certifies it by duality gaps) but dual CD stops at different
# points of each at this tolerance.
EQUIVALENCE = ("dual CD at tol=0.1 stops at different points of the weighted and the "
               "repeated-rows problems (same optimum: tests/test_weights.py)")
EXPECTED_FAILURES = {"check_sample_weight_equivalence_on_dense_data": EQUIVALENCE,
                     "check_sample_weight_equivalence_on_sparse_data": EQUIVALENCE}


def expected_failed_checks(estimator):
    return dict(EXPECTED_FAILURES) if isinstance(estimator, distsvm.LinearSVC) else {}


ESTIMATORS = [distsvm.LinearSVC(tol=0.1, max_iter=30),  # LIBLINEAR -s 1: eps 0.1
              distsvm.LogisticRegression(tol=1e-2, max_iter=100)]


@pytest.mark.filterwarnings("ignore::distsvm.errors.ConvergenceWarning")
@parametrize_with_checks(ESTIMATORS, expected_failed_checks=expected_failed_checks)
def test_sklearn_estimator_checks(estimator, check, client):
    check(estimator)
