"""Ray Serve's side of the runtime: a model folder's replicas and the ingress (router) in front of them."""
