"""The differences the differential run (test_ts_differential.py) still finds: call id -> why. Each is an expected
failure; a fix removes its line (the run then fails on a line left behind: the marks are strict)."""

from __future__ import annotations

CUSTOMIZED_FAIL = "msnb's message names the handler's describe error; TorchServe says 'Prediction failed'"
ALL_CUSTOMIZED = "TorchServe ignores customized=true on /all; msnb asks the handler"
SET_DEFAULT_GET = "TorchServe describes the version on GET .../set-default; msnb answers 404"
OPENAPI = "no OpenAPI description (OPTIONS, /api-description) on Ray"
KFV1 = "no KServe v1 readiness (GET /v1/models/NAME) on the management address"
METHOD_NOT_ALLOWED = "TorchServe's 405 MethodNotAllowedException; msnb answers 404 or 501"
WORKFLOWS = "no workflow API on Ray: TorchServe lists none, msnb answers 404"
GET_PREDICT = "TorchServe predicts on GET too"
NOT_FOUND_MESSAGE = "msnb's 404 message names the path; TorchServe's says 'please refer to API document'"
TOO_DEEP = "TorchServe ignores path segments after the version"
KSERVE = "the KServe v1/v2 paths are not routed on Ray's inference address"
METRICS_FILTER = "the name[] filter of /metrics is not honoured"
METRICS_METHOD = "TorchServe answers /metrics on any method"
EMPTY_URL = "TorchServe answers 404 'empty url'"
DOWNLOAD = "TorchServe's 400 DownloadArchiveException 'Failed to download archive from: URL'"
RELATIVE = "TorchServe's message: 'Relative path is not allowed in url'"
RUNTIME = "runtime is not checked (TorchServe: 400 Invalid RuntimeType value)"
ZERO = "initial_workers=0 starts a replica on Ray (TorchServe registers with 0 workers)"
NAN = "a non-numeric value is refused; TorchServe takes its default"
BS0 = "batch_size=0 described as 1 (and initial_workers=0 starts a replica)"
TIMEOUT = "TorchServe keeps the archive's responseTimeout when it sets one (and initial_workers=0 starts a replica)"
NEGATIVE_WORKERS = "initial_workers=-1 refused by Ray Serve (TorchServe registers with 0 workers)"
ASYNC = "answered once the replicas run; TorchServe answers 202 at once"
JSON = "the register call's JSON body is not read"
SCALE_CHECK = "max_worker < min_worker not refused (TorchServe: 400)"
SCALE_NEGATIVE = "TorchServe answers min_worker=-1 with its 500 IndexOutOfBoundsException"
SCALE_VERSION = "the model_version parameter of a scale is not read"
SCALE_MSG = "TorchServe's message names min_worker, msnb the replicas running"
SCALE_ZERO = "min_worker=0 keeps one replica on Ray"
PAGES = "limit / next_page_token out of range or not a number paged otherwise than TorchServe"
FAIL_MSG = "msnb's message adds the replica's reason"
FAIL_ZERO = "the handler is loaded at a register with 0 workers; TorchServe registers it"
FAIL_AFTER = "follows failing-register-no-worker: the model is not registered on Ray"
ELSEWHERE = "TorchServe takes a missing absolute path's file name from the model store; msnb answers 404"

DIFFERS = {
    "start-describe-customized": CUSTOMIZED_FAIL,
    "start-describe-customized-upper": CUSTOMIZED_FAIL,
    "start-describe-all-customized": ALL_CUSTOMIZED,
    "describe-set-default-path-by-get": SET_DEFAULT_GET,
    "openapi-of-a-model": OPENAPI,
    "kserve-v1-ready": KFV1,
    "kserve-v1-ready-missing": KFV1,
    "management-api-description": OPENAPI,
    "management-options-root": OPENAPI,
    "management-root": METHOD_NOT_ALLOWED,
    "patch-a-model": METHOD_NOT_ALLOWED,
    "workflows-list": WORKFLOWS,
    "predict-by-get": GET_PREDICT,
    "predict-no-name": NOT_FOUND_MESSAGE,
    "predict-too-deep": TOO_DEEP,
    "inference-api-description": OPENAPI,
    "inference-options-root": OPENAPI,
    "inference-unknown-path": NOT_FOUND_MESSAGE,
    "kserve-v1-predict": KSERVE,
    "kserve-v1-predict-missing": KSERVE,
    "kserve-v1-explain": KSERVE,
    "kserve-v2-infer": KSERVE,
    "kserve-v2-infer-missing": KSERVE,
    "metrics-by-name": METRICS_FILTER,
    "metrics-unknown-name": METRICS_FILTER,
    "metrics-by-post": METRICS_METHOD,
    "register-empty-url": EMPTY_URL,
    "register-unfetchable-https": DOWNLOAD,
    "register-unfetchable-http": DOWNLOAD,
    "register-relative-url": RELATIVE,
    "register-encoded-relative-url": RELATIVE,
    "register-runtime-python4": RUNTIME,
    "register-runtime-empty": RUNTIME,
    "register-runtime-refused-unregister": RUNTIME,
    "register-not-synchronous-register": ASYNC,
    "register-json-body": JSON,
    "register-json-body-describe": JSON,
    "register-json-body-unregister": JSON,
    "scale-max-below-min": SCALE_CHECK,
    "scale-min-nan": NAN,
    "scale-min-negative": SCALE_NEGATIVE,
    "scale-max-text": NAN,
    "scale-by-version-parameter": SCALE_VERSION,
    "scale-missing-version-parameter": SCALE_VERSION,
    "scale-range": SCALE_MSG,
    "scale-to-zero": SCALE_ZERO,
    "predict-no-worker": SCALE_ZERO,
    "page-describe-all-customized": ALL_CUSTOMIZED,
    "failing-register": FAIL_MSG,
    "failing-register-no-worker": FAIL_ZERO,
    "failing-scale-up": FAIL_AFTER,
    "failing-describe-after-scale": FAIL_AFTER,
    "failing-unregister-after-scale": FAIL_AFTER,
    "loading-register": ASYNC,
    "register-name-empty": ZERO,
    "register-name-empty-describe": ZERO,
    "no-workers-register": ZERO,
    "no-workers-describe": ZERO,
    "batch-size-text-register": NAN,
    "batch-size-text-describe": NAN,
    "batch-size-text-unregister": NAN,
    "batch-size-negative-register": ZERO,
    "batch-size-negative-describe": ZERO,
    "batch-size-zero-register": BS0,
    "batch-size-zero-describe": BS0,
    "batch-size-empty-register": ZERO,
    "batch-size-empty-describe": ZERO,
    "batch-size-decimal-register": NAN,
    "batch-size-decimal-describe": NAN,
    "batch-size-decimal-unregister": NAN,
    "batch-size-overflow-register": NAN,
    "batch-size-overflow-describe": NAN,
    "batch-size-overflow-unregister": NAN,
    "batch-size-valid-register": ZERO,
    "batch-size-valid-describe": ZERO,
    "max-batch-delay-text-register": NAN,
    "max-batch-delay-text-describe": NAN,
    "max-batch-delay-text-unregister": NAN,
    "max-batch-delay-negative-register": ZERO,
    "max-batch-delay-negative-describe": ZERO,
    "max-batch-delay-valid-register": ZERO,
    "max-batch-delay-valid-describe": ZERO,
    "response-timeout-text-register": NAN,
    "response-timeout-text-describe": NAN,
    "response-timeout-text-unregister": NAN,
    "response-timeout-negative-register": TIMEOUT,
    "response-timeout-negative-describe": TIMEOUT,
    "response-timeout-zero-register": TIMEOUT,
    "response-timeout-zero-describe": TIMEOUT,
    "response-timeout-valid-register": TIMEOUT,
    "response-timeout-valid-describe": TIMEOUT,
    "initial-workers-negative-register": NEGATIVE_WORKERS,
    "initial-workers-negative-describe": NEGATIVE_WORKERS,
    "initial-workers-negative-unregister": NEGATIVE_WORKERS,
    "runtime-python-register": ZERO,
    "runtime-python-describe": ZERO,
    "s3-sse-kms-register": ZERO,
    "s3-sse-kms-describe": ZERO,
    "unknown-parameter-register": ZERO,
    "unknown-parameter-describe": ZERO,
    "name-with-dot-register": ZERO,
    "name-with-dot-describe": ZERO,
    "initial-workers-text-register": NAN,
    "initial-workers-text-describe": NAN,
    "initial-workers-text-unregister": NAN,
    "page-limit=0": PAGES,
    "page-limit=-1": PAGES,
    "page-limit=abc": PAGES,
    "page-limit=1.5": PAGES,
    "page-next_page_token=-1": PAGES,
    "page-next_page_token=x": PAGES,
    "page-limit=1&next_page_token=-2": PAGES,
    "register-absolute-elsewhere": ELSEWHERE,
    "register-absolute-elsewhere-unregister": ELSEWHERE,
}
