"""测试用的无界面 Chromium：一个最小的 W3C WebDriver 客户端（只用标准库）和启动它的上下文管理器。

WebDriver 协议就是 HTTP + JSON，所以不需要 selenium。需要 Debian 的 ``chromium`` 和
``chromium-driver``（``.ci/run`` 会安装）；没有时，用到它的测试跳过并说明原因。
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"          # W3C WebDriver 规定的元素键名

MISSING = "没有找到 chromium / chromedriver（Debian：apt-get install chromium chromium-driver）"
# CI=true 时（.ci/run 负责安装浏览器）缺了浏览器就是失败，而不是悄悄跳过
needs_chromium = pytest.mark.usefixtures("chromium_available")


@pytest.fixture(scope="session")
def chromium_available():
    if CHROMIUM and DRIVER:
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(MISSING + "；CI 里浏览器测试不能跳过")
    pytest.skip(MISSING)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WebDriver:
    """最小的 W3C WebDriver 客户端：每个方法就是一次 HTTP 请求。"""

    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"
        self.sid = None

    def call(self, method: str, path: str, body: dict | None = None):
        url = self.base + (f"/session/{self.sid}" if self.sid else "") + path
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())["value"]

    def start(self, profile: str, window: str = "900,900") -> None:
        args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
                f"--window-size={window}"]
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome", "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
            "goog:loggingPrefs": {"browser": "ALL"}}}}
        self.sid = self.call("POST", "/session", caps)["sessionId"]

    def js(self, script: str, *args):
        return self.call("POST", "/execute/sync", {"script": script, "args": list(args)})

    def element(self, css: str) -> str:
        return self.call("POST", "/element", {"using": "css selector", "value": css})[ELEMENT]

    def console(self) -> list[str]:
        """浏览器控制台里到目前为止的消息（CSP 违规、脚本错误都会出现在这里）。"""
        return [e["message"] for e in self.call("POST", "/se/log", {"type": "browser"})]

    def quit(self) -> None:
        if self.sid:
            try:
                self.call("DELETE", "")
            finally:
                self.sid = None



@contextlib.contextmanager
def chromium_session(window: str = "900,900"):
    """启动 chromedriver 和一个无界面 Chromium，交出 WebDriver；结束时全部关掉。"""
    port = _free_port()
    proc = subprocess.Popen([DRIVER, f"--port={port}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    driver = WebDriver(port)
    profile = tempfile.mkdtemp(prefix="gptcourse-chromium-")
    try:
        for _ in range(100):                  # 等 chromedriver 开始监听
            try:
                driver.call("GET", "/status")
                break
            except OSError:
                time.sleep(0.1)
        driver.start(profile, window)
        yield driver
    finally:
        driver.quit()
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(profile, ignore_errors=True)
