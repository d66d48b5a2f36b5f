"""``/docs`` renders in Chromium: Swagger UI, loaded from the installed swagger-ui-bundle-v2
package through ``/docs/{file}``, reads ``/openapi.json`` (OpenAPI 3.1) and shows one block per
operation, with no error in the page. A Swagger UI that cannot read 3.1 (4.x, as in
swagger-ui-bundle 1.1.0) shows its "Unable to render this definition" box instead."""

from __future__ import annotations

import pytest

from gateway.api.openapi import OPERATIONS

pytestmark = pytest.mark.browser


async def test_docs_render_every_operation(gateway, page):
    files = []
    page.on("response", lambda r: files.append((r.url.rsplit("/", 1)[-1], r.status)))
    await page.goto(gateway.url + "/docs")
    await page.wait_for_selector(".opblock-summary")
    await page.wait_for_function(
        f"() => document.querySelectorAll('.opblock').length >= {len(OPERATIONS)}")
    shown = await page.eval_on_selector_all(
        ".opblock-summary-path", "els => els.map(e => e.getAttribute('data-path'))")
    assert sorted(shown) == sorted(op.path for op in OPERATIONS)
    assert (await page.inner_text(".info .title")).startswith("Voice gateway")
    assert not await page.query_selector(".errors-wrapper")  # no "Unable to render this definition"
    assert ("swagger-ui-bundle.js", 200) in files and ("swagger-ui.css", 200) in files
    assert ("openapi.json", 200) in files
