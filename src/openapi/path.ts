/** The OpenAPI document of Gantry's own API: public, no key. */
export const OPENAPI_PATH = '/v1/openapi.json';
