"""The differential run's sequences, as data (the rows of differential_cases.py, sent after them): scale one model's
workers with each parameter, two versions side by side, unregister and register again, the same archive under two
names, pagination over several models, a handler that fails to load, a model still loading, and last what msnb
refuses on purpose."""

from __future__ import annotations

from differential_cases import KLASS, Call, inference

UNSAFE = "TorchServe 0.12 registers it (200); msnb refuses it with a Hint"


def scaled(id: str, query: str, **more) -> Call:
    return Call(id, "PUT", "/models/klass", query, **more)


SCALE = [
    Call("scale-register", "POST", "/models", "url=klass.mar&initial_workers=1&synchronous=true"),
    Call("scale-describe-registered", "GET", "/models/klass"),
    inference("scale-predict", "POST", "/predictions/klass", KLASS),
    scaled("scale-max-below-min", "min_worker=2&max_worker=1"),
    scaled("scale-min-nan", "min_worker=nan"),
    scaled("scale-min-negative", "min_worker=-1", before="ready:klass"),
    scaled("scale-max-text", "min_worker=1&max_worker=abc", before="ready:klass"),
    scaled("scale-no-parameters", "", before="ready:klass"),
    scaled("scale-synchronous", "min_worker=1&synchronous=true", before="ready:klass"),
    Call("scale-by-version-path", "PUT", "/models/klass/1.0", "min_worker=1&synchronous=true"),
    scaled("scale-by-version-parameter", "min_worker=1&model_version=1.0&synchronous=true"),
    scaled("scale-missing-version-parameter", "min_worker=1&model_version=9.9"),
    Call("scale-missing-version-path", "PUT", "/models/klass/9.9", "min_worker=1"),
    Call("scale-missing-model", "PUT", "/models/nope", "min_worker=1"),
    scaled("scale-to-two", "min_worker=2&synchronous=true"),
    Call("scale-describe-two", "GET", "/models/klass"),
    scaled("scale-range", "min_worker=1&max_worker=3&synchronous=true"),
    Call("scale-describe-range", "GET", "/models/klass", before="ready:klass"),
    scaled("scale-synchronous-upper", "min_worker=1&synchronous=TRUE"),
    scaled("scale-synchronous-one", "min_worker=1&synchronous=1"),
    scaled("scale-to-zero", "min_worker=0&synchronous=true", before="ready:klass"),
    inference("predict-no-worker", "POST", "/predictions/klass", KLASS),
    scaled("scale-back-to-one", "min_worker=1&synchronous=true"),
    inference("predict-after-scale", "POST", "/predictions/klass", KLASS),
]

VERSIONS = [
    Call("version-register", "POST", "/models", "url=klass_v2.mar&initial_workers=1&synchronous=true"),
    Call("version-register-again", "POST", "/models", "url=klass_v2.mar&initial_workers=1&synchronous=true"),
    Call("version-list", "GET", "/models"),
    Call("version-describe-all", "GET", "/models/klass/all"),
    Call("version-describe-default", "GET", "/models/klass"),
    Call("version-describe-second", "GET", "/models/klass/2.0"),
    inference("version-predict-default", "POST", "/predictions/klass", KLASS),
    inference("version-predict-second", "POST", "/predictions/klass/2.0", KLASS),
    Call("version-set-default", "PUT", "/models/klass/2.0/set-default"),
    Call("version-describe-new-default", "GET", "/models/klass"),
    inference("version-predict-new-default", "POST", "/predictions/klass", KLASS),
    Call("version-set-default-missing-version", "PUT", "/models/klass/9.9/set-default"),
    Call("version-set-default-missing-model", "PUT", "/models/nope/1.0/set-default"),
    Call("version-unregister-default", "DELETE", "/models/klass/2.0"),
    Call("version-unregister-default-by-name", "DELETE", "/models/klass"),
    Call("version-set-default-again", "PUT", "/models/klass/2.0/set-default"),
    Call("version-set-default-back", "PUT", "/models/klass/1.0/set-default"),
    Call("version-unregister-second", "DELETE", "/models/klass/2.0"),
    Call("version-describe-all-after", "GET", "/models/klass/all"),
    Call("version-unregister-missing", "DELETE", "/models/klass/9.9"),
    inference("version-predict-unregistered", "POST", "/predictions/klass/2.0", KLASS),
    Call("version-describe-unregistered", "GET", "/models/klass/2.0"),
]

AGAIN = [
    Call("again-unregister", "DELETE", "/models/klass"),
    inference("again-predict-unregistered", "POST", "/predictions/klass", KLASS),
    Call("again-describe-unregistered", "GET", "/models/klass"),
    Call("again-unregister-unregistered", "DELETE", "/models/klass"),
    Call("again-register", "POST", "/models", "url=klass.mar&initial_workers=1"),
    inference("again-predict", "POST", "/predictions/klass", KLASS),
    Call("again-same-url-other-name", "POST", "/models", "url=klass.mar&model_name=klass2&initial_workers=1"),
    inference("again-predict-other-name", "POST", "/predictions/klass2", KLASS),
    Call("again-register-desc", "POST", "/models", "url=desc.mar&initial_workers=1"),
]

PAGES = [
    Call(f"page-{query or 'all'}", "GET", "/models", query)
    for query in (
        "",
        "limit=1",
        "limit=1&next_page_token=1",
        "limit=1&next_page_token=2",
        "limit=1&next_page_token=3",
        "limit=2",
        "limit=2&next_page_token=2",
        "limit=4",
        "limit=0",
        "limit=-1",
        "limit=101",
        "limit=abc",
        "limit=",
        "limit=1.5",
        "next_page_token=-1",
        "next_page_token=x",
        "next_page_token=10",
        "limit=1&next_page_token=-2",
    )
] + [
    Call("page-describe-customized", "GET", "/models/desc", "customized=true"),
    Call("page-describe-all-customized", "GET", "/models/desc/all", "customized=true"),
    Call("page-unregister-other-name", "DELETE", "/models/klass2"),
    Call("page-unregister-desc", "DELETE", "/models/desc"),
    Call("page-after", "GET", "/models"),
]

FAILING = [
    Call("failing-register", "POST", "/models", "url=broken.mar&initial_workers=1&synchronous=true"),
    Call("failing-describe", "GET", "/models/broken"),
    Call("failing-scale", "PUT", "/models/broken", "min_worker=1&synchronous=true"),
    inference("failing-predict", "POST", "/predictions/broken", KLASS),
    Call("failing-unregister", "DELETE", "/models/broken"),
    Call("failing-register-no-worker", "POST", "/models", "url=broken.mar&initial_workers=0"),
    Call("failing-scale-up", "PUT", "/models/broken", "min_worker=1&synchronous=true"),
    Call("failing-describe-after-scale", "GET", "/models/broken", read="status"),
    Call("failing-unregister-after-scale", "DELETE", "/models/broken"),
]

LOADING = [
    Call("loading-register", "POST", "/models", "url=loading.mar&initial_workers=1&synchronous=false"),
    inference("loading-predict", "POST", "/predictions/loading", KLASS),
    Call("loading-describe", "GET", "/models/loading", read="status"),
    inference("loading-predict-loaded", "POST", "/predictions/loading", KLASS, before="ready:loading"),
    Call("loading-unregister", "DELETE", "/models/loading"),
    inference("loading-predict-unregistered", "POST", "/predictions/loading", KLASS),
]

# Last: what TorchServe registers and msnb refuses (nothing after them depends on TorchServe holding them).
REFUSED_ON_PURPOSE = [
    Call(
        "unsafe-file-url-outside-store",
        "POST",
        "/models",
        "url={outside}&model_name=outside&initial_workers=0",
        deliberate=UNSAFE,
    ),
    Call(
        "unsafe-name-up-two", "POST", "/models", "url=klass.mar&model_name=../../x&initial_workers=0", deliberate=UNSAFE
    ),
    Call(
        "unsafe-name-up-inside",
        "POST",
        "/models",
        "url=klass.mar&model_name=ok/../z&initial_workers=0",
        deliberate=UNSAFE,
    ),
]


def all_calls() -> list[Call]:
    from differential_cases import AT_START, INFERENCE, KEYS, METRICS, PARAMETERS, REFUSED_REGISTERS

    return [
        *AT_START,
        *INFERENCE,
        *METRICS,
        *KEYS,
        *REFUSED_REGISTERS,
        *PARAMETERS,
        *SCALE,
        *VERSIONS,
        *AGAIN,
        *PAGES,
        *FAILING,
        *LOADING,
        *REFUSED_ON_PURPOSE,
    ]
