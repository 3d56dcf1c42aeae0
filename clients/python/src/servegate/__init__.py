"""servegate: call models and Python servers behind a servegate gateway, from Python.

    from servegate import Deployment, GatewayError

    fraud = Deployment(gateway_url="https://models.example.com", project="fraud_detection", deployment="fraud",
                       model_server="sklearn", api_key=os.environ["SERVEGATE_KEY"])
    fraud.get_inference_url()   # https://models.example.com/v1/fraud_detection/fraud/v1/models/fraud:predict
    fraud.predict(instances=[[6.8, 2.8, 4.8, 1.4]])

Standard library only (urllib.request). The same names, in camelCase, are in the TypeScript client
(`servegate/client`); both compute URLs by the same rules.
"""

from ._deployment import MODEL_SERVERS, Deployment
from ._errors import GatewayError
from ._http import DEFAULT_TIMEOUT, Response

from ._version import __version__

__all__ = ["Deployment", "GatewayError", "Response", "MODEL_SERVERS", "DEFAULT_TIMEOUT", "__version__"]
